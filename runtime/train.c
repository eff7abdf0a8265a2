/* runtime/train.c: placeholder, being written */
