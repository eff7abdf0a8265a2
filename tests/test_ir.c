/* tests/test_ir.c: placeholder, being written */
