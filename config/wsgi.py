import os

from django.core.wsgi import get_wsgi_application

from config.embedded import embedded_defaults_ensure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# gunicorn's entry point: settings only read the environment, so the embedded PostgreSQL (when
# DATABASE_URL is unset) and the demo's secret key are provided here, before they are read.
embedded_defaults_ensure()
application = get_wsgi_application()
