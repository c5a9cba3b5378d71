"""Celery beat's scheduler: RedBeat's, which stands by instead of exiting when it loses its lock
(a tick later than BEAT_LOCK_SECONDS or a FLUSHDB took beat, and the sweeps, down for good)."""

from __future__ import annotations

from typing import Any

import redis.exceptions
from celery.signals import beat_init
from celery.utils.log import get_logger
from redbeat.schedulers import (
    DEFAULT_MAX_INTERVAL,
    LUA_EXTEND_TO_SCRIPT,
    RedBeatScheduler,
    acquire_distributed_beat_lock,
    get_redis,
)

logger = get_logger("celery.beat")

# Every tick takes the lock when it is not held: starting and coming back are one path.
beat_init.disconnect(acquire_distributed_beat_lock)


class StandbyScheduler(RedBeatScheduler):
    def tick(self, *args: Any, **kwargs: Any) -> float:
        # How long beat sleeps before the next tick: a standby beat tries the lock this often.
        again = float(self.max_interval or DEFAULT_MAX_INTERVAL)
        try:
            if self.lock is None and not self._take_lock():
                return again
            return super().tick(*args, **kwargs)
        except redis.exceptions.LockError as exc:
            # Another beat may send the schedule now: this one sends nothing until it holds it.
            logger.warning("beat: Lost lock (%s); standing by", exc)
            self.lock = None
        except redis.exceptions.RedisError as exc:
            # Whether the lock holds: the next tick's renewal says, before anything is sent.
            logger.warning("beat: Redis did not answer (%s); trying again", exc)
        return again

    def _take_lock(self) -> bool:
        client = get_redis(self.app)
        lock = client.lock(self.lock_key, timeout=self.lock_timeout, sleep=self.max_interval)
        # RedBeat's renewal sets the lock's time to live; redis-py's would add to it.
        lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)
        if not lock.acquire(blocking=False):
            return False
        logger.info("beat: Acquired lock")
        self.lock = lock
        # A FLUSHDB that took the lock took the schedule too: put its entries back.
        self.setup_schedule()
        return True
