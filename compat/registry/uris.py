"""Credentials hidden in every URI compat prints, logs or records (docs/design.md, Registry
conventions).

A tracking URI or database URL may carry a secret: a password (``user:password@``), a token as
the whole user part of an ``http(s)://`` URL (``https://<token>@host``), or a query parameter
(``?token=...``, ``password=``, ``access_token=``, ``sig=``, ``X-Amz-Signature=``, ...).
:func:`mask` hides each of them wherever it occurs in a text, so it applies as well to a URI as
to an error message that repeats one (MLflow's, psycopg's, SQLAlchemy's). The user name of a
``user:password@`` pair stays (it says which account), as do host, port and path.
"""

from __future__ import annotations

import re

HIDDEN = "***"

# scheme://user:password@ : the password up to the last "@" before the path (a password may
# hold an unescaped "@"); the user part holds no ":", "/", "@", "?" or "#".
_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#'\"]*):[^\s/'\"]*@")
# http(s)://token@ : a user part alone on an http(s) URL is a token (basic auth with no
# password means nothing else), hidden whole.
_TOKEN_USER = re.compile(r"(?P<head>\bhttps?://)[^\s:/@?#'\"]+@", re.IGNORECASE)
# ?key=value / &key=value / ;key=value whose key names a secret.
_SECRET_PARAM = re.compile(
    r"(?P<head>[?&;](?:[\w.\-]*?)"
    r"(?:password|passwd|pwd|token|secret|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|"
    r"sslkey|sig|signature|credential|auth)[\w.\-]*=)[^&#\s'\")\]>]*",
    re.IGNORECASE,
)


def mask(text: str) -> str:
    """``text`` with every credential of every URI in it replaced by ``***``.

    >>> mask("http://alice:s3cret@host:5000/x?token=abc&run=1")
    'http://alice:***@host:5000/x?token=***&run=1'
    >>> mask("https://ghp_abc123@host/")
    'https://***@host/'
    """
    text = _PASSWORD.sub(rf"\g<head>:{HIDDEN}@", text)
    text = _TOKEN_USER.sub(rf"\g<head>{HIDDEN}@", text)
    return _SECRET_PARAM.sub(rf"\g<head>{HIDDEN}", text)


def first_line(err: BaseException, limit: int = 300) -> str:
    """An error's first line (at most ``limit`` characters; its type's name when it has no
    text) with every credential hidden: what compat quotes of a library's exception."""
    lines = str(err).strip().splitlines()
    return mask((lines[0] if lines else type(err).__name__)[:limit])


__all__ = ["HIDDEN", "first_line", "mask"]
