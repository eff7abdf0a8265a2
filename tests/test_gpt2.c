/* tests/test_gpt2.c: placeholder, being written */
