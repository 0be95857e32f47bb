"""Django's PostgreSQL backend, plus the limit of 65,535 parameters a statement may carry.

With values bound on the server (`TC_DB_PREPARED`, psycopg 3's `server_side_binding`) the count travels as a
16-bit number, and a statement with more fails ("number of parameters must be between 0 and 65535"). Django
knows such a limit for SQLite and Oracle but not for PostgreSQL, so `in_bulk` of a big training job's records,
`bulk_create` without a batch size, and deleting a project of 100,000 items each sent one statement too many.
Declared here as those backends declare theirs, Django splits that work into batches that fit.
"""

from __future__ import annotations

from itertools import chain

from django.db import models
from django.db.backends.postgresql import base, features, operations


class DatabaseFeatures(features.DatabaseFeatures):
    max_query_params = 2**16 - 1


class DatabaseOperations(operations.DatabaseOperations):
    def bulk_batch_size(self, fields, objs):
        """As Oracle's: as many rows as fit in one statement's parameters."""
        fields = list(chain.from_iterable(
            field.fields if isinstance(field, models.CompositePrimaryKey) else [field] for field in fields))
        if fields:
            return self.connection.features.max_query_params // len(fields)
        return len(objs)


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures
    ops_class = DatabaseOperations
