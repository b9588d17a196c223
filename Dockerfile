# One image for web, worker, beat and the simulator in docker-compose.yml.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN SECRET_KEY=build-only DATABASE_URL=postgres://build@localhost/build CELERY_BROKER_URL=memory:// \
    TANDEM_DEBUG=0 python manage.py collectstatic --noinput
USER nobody
EXPOSE 8000
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
