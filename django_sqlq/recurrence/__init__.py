"""What a recurring job is, and how one is declared and checked, below the models (whose
``DatabaseSchedule.clean()`` uses it): :mod:`~django_sqlq.recurrence.definition` (a
``Schedule``, parsed and checked), :mod:`~django_sqlq.recurrence.declared` (the code's
schedules) and :mod:`~django_sqlq.recurrence.rows` (a stored row's). Reading the stored
rows and enqueueing the ticks, which need the models, are :mod:`django_sqlq.schedules`'s;
that package is the public one and names all of this again."""
