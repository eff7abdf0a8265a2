/* models/gpt2.c: placeholder, being written */
