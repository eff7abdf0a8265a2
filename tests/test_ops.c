/* tests/test_ops.c: placeholder, being written */
