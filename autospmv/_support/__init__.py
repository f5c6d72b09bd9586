"""What every layer may use: the devices, CPU threads, compiled-code caches, the validation of
input and the timer. Nothing here imports another part of autospmv."""
