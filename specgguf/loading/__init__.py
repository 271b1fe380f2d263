"""A model pair made ready to generate: the preflight refusals made before any weight is
read, the memory budget, and the loaded Session."""
