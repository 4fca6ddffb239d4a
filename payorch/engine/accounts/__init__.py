"""Accounts: admin passwords, access tokens, invites, the identifiers people type, and re-encrypting
stored secrets under a new key (docs/architecture.md, "Rooms")."""
