"""Django's PostgreSQL backend, told how many parameters one statement may carry (see `base`)."""
