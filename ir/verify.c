/* ir/verify.c: placeholder, being written */
