"""The attack suite: hostile clients, hostile files, hostile local users. Each test asserts what must hold."""
