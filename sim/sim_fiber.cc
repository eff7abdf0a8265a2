// sim_fiber.cc: switching between fibers. On x86-64 a switch saves the callee-saved registers
// and the SSE/x87 control words on the old stack and pops them from the new one (about 10 ns);
// elsewhere glibc's ucontext (about 270 ns: it saves the signal mask with a system call). Built
// with AddressSanitizer, every switch is announced to it (its fiber protocol, below).
#include <stdlib.h>

#include "sim_internal.h"

#ifdef SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(SN_SIM_UCONTEXT)

/* void sim_switch_sp(void **save, void *load): the System V callee-saved state only; the fiber
 * code is ordinary compiled C++, so nothing else survives a call anyway. */
asm(".text\n"
    ".p2align 4\n"
    ".type sim_switch_sp, @function\n"
    "sim_switch_sp:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size sim_switch_sp, .-sim_switch_sp\n");
extern "C" void sim_switch_sp(void **save, void *load);

static void raw_make(sim_ctx *c, char *stack, size_t bytes, void (*entry)(void)) {
    uintptr_t top = ((uintptr_t)stack + bytes) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;           /* entry's return address: it never returns */
    *--sp = (void *)entry;  /* where the first switch's `ret` goes, rsp = top - 8 as after a call */
    for (int i = 0; i < 6; i++) *--sp = NULL; /* rbp rbx r12-r15 */
    *--sp = NULL;
    unsigned mxcsr = 0x1f80; /* the defaults: all exceptions masked, round to nearest */
    unsigned short fpucw = 0x037f;
    memcpy(sp, &mxcsr, 4);
    memcpy((char *)sp + 4, &fpucw, 2);
    c->sp = sp;
}

static void raw_switch(sim_ctx *from, sim_ctx *to) { sim_switch_sp(&from->sp, to->sp); }

#else

static void raw_make(sim_ctx *c, char *stack, size_t bytes, void (*entry)(void)) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}

static void raw_switch(sim_ctx *from, sim_ctx *to) { swapcontext(&from->uc, &to->uc); }

#endif

#ifdef SIM_ASAN
/* AddressSanitizer's protocol (sanitizer/common_interface_defs.h): before a switch,
 * __sanitizer_start_switch_fiber names the stack it goes to and parks the running fiber's fake
 * stack (stack-use-after-return detection) in a local of the fiber being left; once on the new
 * stack, __sanitizer_finish_switch_fiber takes that fiber's fake stack back (NULL at a fiber's
 * first run, which has none) and says which stack it came from: that is how the scheduler's
 * stack, the OS thread's, is learnt. A fiber never resumed passes NULL: its fake stack is freed. */
static thread_local sim_ctx *switch_from, *switch_to;

static void fiber_start(void) {
    sim_ctx *from = switch_from, *self = switch_to;
    __sanitizer_finish_switch_fiber(NULL, &from->stack_lo, &from->stack_bytes);
    self->entry();
    abort(); /* entry leaves with sim_ctx_leave */
}

void sim_stacks_forget(void *mem, size_t bytes) { ASAN_UNPOISON_MEMORY_REGION(mem, bytes); }
#else
void sim_stacks_forget(void *, size_t) {}
#endif

void sim_ctx_make(sim_ctx *c, char *stack, size_t bytes, void (*entry)(void)) {
    c->stack_lo = stack;
    c->stack_bytes = bytes;
    c->entry = entry;
#ifdef SIM_ASAN
    /* the redzones of the frames a fiber abandoned mid-call (a failed launch) left poisoned */
    ASAN_UNPOISON_MEMORY_REGION(stack, bytes);
    raw_make(c, stack, bytes, fiber_start);
#else
    raw_make(c, stack, bytes, entry);
#endif
}

void sim_ctx_switch(sim_ctx *from, sim_ctx *to) {
#ifdef SIM_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, to->stack_lo, to->stack_bytes);
    switch_from = from;
    switch_to = to;
    raw_switch(from, to);
    __sanitizer_finish_switch_fiber(fake, &switch_from->stack_lo, &switch_from->stack_bytes);
#else
    raw_switch(from, to);
#endif
}

void sim_ctx_leave(sim_ctx *from, sim_ctx *to) {
#ifdef SIM_ASAN
    __sanitizer_start_switch_fiber(NULL, to->stack_lo, to->stack_bytes);
    switch_from = from;
    switch_to = to;
#endif
    raw_switch(from, to);
    abort(); /* never resumed */
}
