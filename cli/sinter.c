/* cli/sinter.c: placeholder, being written */
