/* sinter.c: the command line: `sinter COMMAND [options]` dispatched to the commands' tables
 * (cli.h), `sinter help [COMMAND]`, `sinter --version`. Convention: the library reports errors
 * to the commands; only cli/ prints usage and chooses the exit status: 0 done, 1 a failure, 2 a
 * usage error (and 128 + the signal for a training run stopped by SIGINT or SIGTERM). */
#include <stdio.h>
#include <string.h>

#include "api/sinter.h"
#include "models/gpt2.h"
#include "runtime/info.h"
#include "cli.h"

static int cmd_info(int argc, char **argv) {
    int rc = cli_parse(&cli_info_cmd, argc, argv, NULL);
    if (rc >= 0) return rc;
    sn_info_print(stdout);
    return 0;
}

const cli_command cli_info_cmd = {
    .name = "info",
    .synopsis = "",
    .summary = "Prints the versions, the CPU's features, NVRTC, cuBLASLt and the CUDA devices.",
    .run = cmd_info,
};

/* Every command, in the order `sinter help` lists them. A new command: one line here (cli.h). */
static const cli_command *const commands[] = {
    &cli_info_cmd, &cli_graph_cmd, &cli_train_cmd, &cli_plan_cmd, &cli_prepare_cmd,
    &cli_export_cmd,
    &cli_generate_cmd,
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static const cli_command *find(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i]->name, name)) return commands[i];
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: sinter COMMAND [options]      (sinter help COMMAND: its options)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "  %-9s %s\n", "help", "Prints a command's options (also sinter COMMAND --help).");
    fprintf(f, "  %-9s %s\n", "version", "Prints the version (also --version, -V).");
    fprintf(f, "\nOptions: long (--steps 5, --steps=5; a unique prefix will do: --temp 0.8) and, for\n"
               "some, short (-s 5); -- ends them.\n"
               "Exit status: 0 done; 1 a failure (the message says what and what to do); 2 a usage\n"
               "error (an unknown option, a missing or out-of-range value); sinter train stopped by\n"
               "SIGINT or SIGTERM: 130 or 143.\n\nmodels: %s\n", sn_gpt2_config_names());
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
        if (argc > 2) return cli_usage_error(NULL, "%s takes no arguments, got '%s'", cmd, argv[2]);
        printf("sinter %s\n", SINTER_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        if (argc == 2) {
            usage(stdout);
            return 0;
        }
        const cli_command *c = find(argv[2]);
        if (!c || argc > 3)
            return cli_usage_error(NULL, c ? "help takes one command, got '%s'"
                                           : "help: unknown command '%s'", argv[c ? 3 : 2]);
        cli_help(c, stdout);
        return 0;
    }
    const cli_command *c = find(cmd);
    if (!c) return cli_usage_error(NULL, "unknown command '%s'", cmd);
    return c->run(argc - 1, argv + 1);
}
