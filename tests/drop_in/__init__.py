"""Clients written the way users of other servers already call them, used unchanged against ernie-deploy."""
