"""Django's Redis cache, keeping its client.

Django's `RedisCacheClient` builds a new `redis.Redis` for every cache call (over the same connection pool), and
building one sets up its table of response callbacks: about 0.2 ms, on every signed-in request, since sessions
are read from this cache. One client per server serves every call; `redis.Redis` is safe to share between
threads, and the pool under it is the same either way.
"""

from __future__ import annotations

from django.core.cache.backends import redis as django_redis


class RedisCacheClient(django_redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = RedisCacheClient
