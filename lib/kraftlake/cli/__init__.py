"""What the jobs do: configuration from the command line, runtime, terminal output, and one module per job."""
