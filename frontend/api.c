/* frontend/api.c: placeholder, being written */
