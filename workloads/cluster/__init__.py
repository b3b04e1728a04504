"""The one seam to a Kubernetes API server: the client, its transports, waits and run status."""
