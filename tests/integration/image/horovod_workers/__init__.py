"""Worker programs that the Horovod image tests start under `mpirun`, and the launcher they share."""
