/* version.c: the library's version at run time (sinter.h's sn_version), so a program can tell
 * the header it was compiled with from the library it runs with. */
#include "sinter.h"

const char *sn_version(void) { return SINTER_VERSION; }
