/* ir/print.c: placeholder, being written */
