/* tests/test_grad.c: placeholder, being written */
