/* runtime/data.c: placeholder, being written */
