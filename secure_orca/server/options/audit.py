"""Audit (kube's AuditOptions, the log backend): one audit.k8s.io/v1 event per request, and its rotation."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from secure_orca.server.audit.log import ALLOWED, DEFAULT_MAXBACKUP, DEFAULT_MAXSIZE_MB, DEFAULT_MODE, MODES


@dataclass(frozen=True)
class AuditConfig:
    path: str = ""  # --audit-log-path ('-': standard out; empty: no audit)
    maxsize: int = DEFAULT_MAXSIZE_MB  # --audit-log-maxsize, MB
    maxbackup: int = DEFAULT_MAXBACKUP  # --audit-log-maxbackup
    mode: str = DEFAULT_MODE  # --audit-log-mode (kube's: blocking, blocking-strict, batch)


def add_flags(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--audit-log-path",
        default="",
        help="write one audit event (audit.k8s.io/v1 JSON) per request to this file; '-' means standard out; with "
        "--workers above 1, one process writes it for every worker",
    )
    a(
        "--audit-log-maxsize",
        type=int,
        default=DEFAULT_MAXSIZE_MB,
        help=f"MB before the audit log is rotated; 0: never (default {DEFAULT_MAXSIZE_MB})",
    )
    a(
        "--audit-log-maxbackup",
        type=int,
        default=DEFAULT_MAXBACKUP,
        help=f"rotated audit logs to keep; 0 keeps all (default {DEFAULT_MAXBACKUP})",
    )
    a(
        "--audit-log-mode",
        default=DEFAULT_MODE,
        help="blocking (default): a request whose event finds the queue full waits for room; blocking-strict: also "
        "refuse requests (500) while the log cannot be written; batch: drop the event (counted)",
    )


def validate(args: argparse.Namespace) -> list[str]:
    """As kube's AuditOptions.Validate words it."""
    errors = [
        f"--audit-log-{flag} {getattr(args, f'audit_log_{flag}')} can't be a negative number"
        for flag in ("maxsize", "maxbackup")
        if getattr(args, f"audit_log_{flag}") < 0
    ]
    if args.audit_log_mode not in MODES:  # validateBackendMode
        errors.append(f"invalid audit log mode {args.audit_log_mode}, allowed modes are {ALLOWED}")
    return errors


def to_config(args: argparse.Namespace) -> AuditConfig:
    return AuditConfig(args.audit_log_path, args.audit_log_maxsize, args.audit_log_maxbackup, args.audit_log_mode)
