"""The JSON bodies kube-apiserver answers with: a ``SelfSubjectReview`` (authentication.k8s.io/v1, what
``kubectl auth whoami`` reads) and the ``Status`` of a failed authentication (401)."""

from __future__ import annotations

from typing import Any

from secure_orca.authn.user import UserInfo

UNAUTHORIZED_STATUS: dict[str, Any] = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


def user_info(user: UserInfo) -> dict[str, Any]:
    """kube's ``authentication/v1.UserInfo``: every field is omitted when empty (``omitempty``)."""
    info: dict[str, Any] = {}
    if user.name:
        info["username"] = user.name
    if user.uid:
        info["uid"] = user.uid
    if user.groups:
        info["groups"] = list(user.groups)
    if user.extra:
        info["extra"] = {key: list(values) for key, values in user.extra.items()}
    return info


def self_subject_review(user: UserInfo) -> dict[str, Any]:
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": user_info(user)},
    }
