"""Reading what a failed job left behind: logs, and the catalogue of failure signatures."""
