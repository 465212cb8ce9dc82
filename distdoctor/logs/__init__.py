"""`distdoctor log`: read what a failed job left behind and name the cause, the rank and the fix."""
