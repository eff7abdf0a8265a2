/* tests/test_train.c: placeholder, being written */
