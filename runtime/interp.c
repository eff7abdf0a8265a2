/* runtime/interp.c: placeholder, being written */
