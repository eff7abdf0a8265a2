/* opts.h: the one option parser of the `sinter` commands: each command is a table of options
 * (long name, short letter, type, range, help) that both getopt_long's parse and the command's
 * --help are made from, so the two cannot disagree. Convention: a value lands in the command's
 * own struct at the option's offset, typed by the table (see cli_opt_type); a usage error is
 * printed here and answered with exit status 2. */
#ifndef SN_CLI_OPTS_H
#define SN_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    CLI_FLAG,   /* no value: a bool set true */
    CLI_STR,    /* any text: a const char * */
    CLI_INT,    /* a whole decimal number in [lo, hi]: a long */
    CLI_REAL,   /* a decimal number >= lo (> lo when lo_open) and < hi (<= when hi_closed): a double */
    CLI_BYTES,  /* a size such as 6GiB, 500MiB or 8e9 (bytes), > 0: a long long; with auto_word,
                   also the word "auto": -1 */
    CLI_CHOICE, /* one of the words in choices ("a, b, c") or choices_fn(): a const char * */
} cli_opt_type;

typedef struct {
    const char *name;  /* long name without the dashes: "steps" */
    char letter;       /* short option ('s' for -s); 0: none */
    cli_opt_type type;
    const char *arg;   /* the value's name in the help: "N", "FILE" */
    size_t offset;     /* where the value goes in the command's struct */
    double lo, hi;     /* CLI_INT, CLI_REAL: the range */
    bool lo_open;      /* CLI_REAL: lo itself is out of range */
    bool hi_closed;    /* CLI_REAL: hi itself is in range */
    bool auto_word;    /* CLI_BYTES: "auto" is a value too (stored as -1) */
    const char *choices;               /* CLI_CHOICE: "auto, cuda, cpu, interp" */
    const char *(*choices_fn)(void);   /* CLI_CHOICE: the list from the library, when not fixed */
    const char *help;  /* lines joined by '\n'; the range or the choices are added */
} cli_opt;

/* A command: its table and what its help prints around it. */
typedef struct cli_command {
    const char *name;     /* "train" */
    const char *synopsis; /* after "usage: sinter NAME ": "[options]" */
    const char *summary;  /* one line for `sinter --help` */
    const cli_opt *opts;
    int n_opts;
    const char *notes;    /* printed after the options; NULL: none */
    int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} cli_command;

#define CLI_OPTS(table) table, (int)(sizeof table / sizeof table[0])

/* Parses argv (argv[0]: the command's name) into out by c's table with getopt_long: long and
 * short options, --opt=value, "--" ends the options, and the command takes no operands.
 * Returns -1 to go on, 0 after printing the help (--help, -h), 2 after a usage error (printed:
 * unknown or ambiguous option, missing value, value out of range naming the range, operand). */
int cli_parse(const cli_command *c, int argc, char **argv, void *out);

/* The command's help: usage line, each option with its range or choices, the notes. */
void cli_help(const cli_command *c, FILE *f);

/* Prints "sinter CMD: <formatted message>" and the hint to see `sinter help CMD` to stderr;
 * returns the exit status of a usage error, 2. */
int cli_usage_error(const cli_command *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Whether word is one of list's words ("a, b, c"). */
bool cli_choice_ok(const char *list, const char *word);

#endif
