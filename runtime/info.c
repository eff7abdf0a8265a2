/* runtime/info.c: placeholder, being written */
