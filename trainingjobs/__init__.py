"""Fine-tune jobs: launched by admins, run by Celery workers."""
