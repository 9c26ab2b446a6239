"""Lock-free structures over shared memory in Agrona's layouts."""
