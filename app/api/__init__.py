"""HTTP routes: parse the request, call the service, shape the response; nothing else."""
