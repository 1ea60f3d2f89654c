"""User-facing errors: the CLI prints them as one line and exits non-zero."""


class UserError(Exception):
    """Bad input from the user (config, path, option). Printed as ``morl: error: <message>``."""
