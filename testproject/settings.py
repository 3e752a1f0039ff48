"""Settings of the demo and test project.

With no environment it runs on embedded defaults: SQLite, a filesystem
Celery broker under ``.run/broker`` and in-memory caches.  ``DATABASE_URL``
(postgres://...) and ``REDIS_URL`` switch to PostgreSQL, a Redis broker and
django-redis caches with shared circuit breakers.  ``OUTBOX_BROKER_URL``
(amqp://... for RabbitMQ, or redis://...) chooses the Celery broker apart from
the caches, which stay on ``REDIS_URL``.  ``OUTBOX_SETTINGS_JSON`` overrides
``OUTBOX_*`` settings (tests and benchmarks use it for workers).
"""

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
RUN_DIR = Path(os.environ.get("OUTBOX_RUN_DIR", BASE_DIR / ".run"))
RUN_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = "testproject-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"  # Django sets the process TZ from it: logs and benchmark times in UTC
ROOT_URLCONF = "testproject.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_outbox",
    "testproject.demo",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"


def _database(url: str) -> dict[str, object]:
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }


DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": _database(DATABASE_URL)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("OUTBOX_SQLITE", str(RUN_DIR / "demo.sqlite3")),
            # IMMEDIATE: a transaction takes the write lock when it begins, so that two
            # workers that read then write wait in turn instead of failing at once.
            "OPTIONS": {
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL;",
                "transaction_mode": "IMMEDIATE",
            },
            "TEST": {"NAME": str(RUN_DIR / "test.sqlite3")},
        }
    }

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": os.environ.get("REDIS_CACHE_URL", REDIS_URL),
            "OPTIONS": {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 5},
        },
    }
    OUTBOX_BREAKER_CACHE = "default"
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# The Celery broker: OUTBOX_BROKER_URL, else Redis at REDIS_URL, else kombu's filesystem
# transport (the demo's: no server).  Each gets the README's settings for it.
CELERY_BROKER_URL = os.environ.get("OUTBOX_BROKER_URL", "") or REDIS_URL
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object]
if CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
    # RabbitMQ: -Q order is not a priority (see docs/deployment.md); wait for the broker's
    # confirmation of each publish, so that a message it did not take is known as lost.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
elif CELERY_BROKER_URL:
    # Redis: serve the queues in -Q order (the priority lane first); redeliver what a
    # worker took and did not acknowledge within the hour.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "queue_order_strategy": "priority",
        "visibility_timeout": 3600,
    }
else:
    BROKER_DIR = RUN_DIR / "broker"
    for sub in ("in", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    # kombu's filesystem transport, but each message appears whole (see broker_files).
    CELERY_BROKER_TRANSPORT = "testproject.broker_files:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "in"),
        "data_folder_out": str(BROKER_DIR / "in"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }

# Take one message at a time, and acknowledge it after the work.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_TASK_DEFAULT_QUEUE = "outbox"
CELERY_BEAT_SCHEDULE_FILENAME = str(RUN_DIR / "celerybeat-schedule")

OUTBOX_KEY_RESOLVER = "testproject.demo.keys.resolve"
OUTBOX_WEBHOOK_SECRET_RESOLVER = "testproject.demo.webhooks.secrets"
OUTBOX_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
OUTBOX_COLLECTION_SYNCHRONIZATION = "testproject.demo.synchronization.collection_synchronization"
globals().update(json.loads(os.environ.get("OUTBOX_SETTINGS_JSON", "{}")))
if globals().get("OUTBOX_TEST_FAULTS"):  # a Redis URL: the partial-failure tests' workers
    INSTALLED_APPS.append("testproject.faults.FaultsConfig")
if globals().get("OUTBOX_TEST_MODULES"):  # a Redis URL: the extension seam's test worker
    INSTALLED_APPS.append("testproject.loaded_modules.LoadedModulesConfig")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_outbox": {"handlers": ["console"], "level": "WARNING"}},
}
