// sim_fiber.cc: switching between fibers. On x86-64 a switch saves the callee-saved registers
// and the SSE/x87 control words on the old stack and pops them from the new one (about 10 ns);
// elsewhere glibc's ucontext (about 270 ns: it saves the signal mask with a system call).
#include "sim_internal.h"

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

void sim_ctx_make(sim_ctx *c, char *stack, size_t bytes, void (*entry)(void)) {
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

void sim_ctx_switch(sim_ctx *from, sim_ctx *to) { sim_switch_sp(&from->sp, to->sp); }

#else

void sim_ctx_make(sim_ctx *c, char *stack, size_t bytes, void (*entry)(void)) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}

void sim_ctx_switch(sim_ctx *from, sim_ctx *to) { swapcontext(&from->uc, &to->uc); }

#endif
