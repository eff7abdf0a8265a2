/* ir/parse.c: placeholder, being written */
