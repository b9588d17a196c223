#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Settings only read the environment: the embedded PostgreSQL (when DATABASE_URL is unset)
    # and the demo's secret key are this entry point's to provide.
    from config.embedded import embedded_defaults_ensure

    embedded_defaults_ensure()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
