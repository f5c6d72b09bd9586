"""Running: the operator, the devices, the validation of input, CPU threads, compiled-code
caches and the timer."""
