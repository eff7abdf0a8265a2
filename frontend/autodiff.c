/* frontend/autodiff.c: placeholder, being written */
