"""A project written for django-tasks-db, switched to django_sqlq as the migration guide says:
only the ``BACKEND`` line (settings.py) and the worker command's name changed."""
