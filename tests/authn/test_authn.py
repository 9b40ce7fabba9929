"""The authenticator chain (pure, no sockets): requestheader, x509, token file, anonymous, union, group, and
the JSON bodies, checked against kube-apiserver's rules (k8s.io/apiserver 24a394e516bf)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from secure_orca import pki
from secure_orca.authn import bearertoken, requestheader, review, tokenfile
from secure_orca.authn import x509 as x509_authn
from secure_orca.authn.authenticator import NOT_MINE, Request
from secure_orca.authn.requestheader import IdentityHeaders, RequestHeaderConfig
from secure_orca.authn.tokenfile import TokenFile
from secure_orca.authn.union import chain
from secure_orca.authn.user import ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, CREDENTIAL_ID_KEY, UserInfo
from secure_orca.errors import CredentialError
from secure_orca.x509.chainverifier import NO_CERTIFICATE, ChainVerifier

NOW = dt.datetime.now(dt.UTC)
FP_CA = pki.make_ca("front-proxy-ca")
CLIENT_CA = pki.make_ca("client-ca")
FP = pki.issue(FP_CA, pki.FRONT_PROXY_CN).cert
USER = pki.issue(CLIENT_CA, "jane", organization="devs").cert
FRONT_PROXY = ChainVerifier([FP_CA.cert], [pki.FRONT_PROXY_CN])
CLIENTS = ChainVerifier([CLIENT_CA.cert])
TOKENS = TokenFile({"s3cret-token": UserInfo("tok-user", "42", ("a", "b"))})
CONFIG = RequestHeaderConfig()


def request(headers: list[tuple[str, str]] | None = None, cert: x509.Certificate | None = None) -> Request:
    """A request with both certificate checks done as the server does them."""
    encoded = [(n.encode(), v.encode()) for n, v in headers or []]
    if cert is None:
        return Request(encoded, NOW)
    return Request(encoded, NOW, cert, FRONT_PROXY.verify([cert], NOW), CLIENTS.verify([cert], NOW))


def full_chain(anonymous: bool = True):
    return chain(requestheader_config=CONFIG, client_certs=True, tokens=TOKENS, anonymous_auth=anonymous)


IMPERSONATION = [("X-Remote-User", "system:admin"), ("X-Remote-Group", "system:masters")]


# --- requestheader -------------------------------------------------------------------------------------


def test_front_proxy_headers_are_believed() -> None:
    got = requestheader.authenticate(
        CONFIG,
        request(
            [
                ("x-remote-user", "alice"),
                ("X-REMOTE-GROUP", "g1"),
                ("x-remote-group", ""),
                ("x-remote-group", "g2"),
                ("X-Remote-Uid", "u-1"),
                ("X-Remote-Extra-Scopes", "view"),
                ("x-remote-extra-scopes", "edit"),
                ("x-remote-extra-Reason%2fWhy", "audit"),
                ("x-remote-extra-bad%zz", "kept"),
            ],
            FP,
        ),
    )
    assert got.user == UserInfo(
        "alice", "u-1", ("g1", "g2"), {"scopes": ("view", "edit"), "reason/why": ("audit",), "bad%zz": ("kept",)}
    )


def test_username_is_the_first_value_of_the_first_header_that_has_one() -> None:
    config = RequestHeaderConfig(username_headers=("X-Proxy-User", "X-Remote-User"))
    got = requestheader.authenticate(
        config, request([("x-remote-user", "second"), ("x-proxy-user", "first"), ("x-proxy-user", "later")], FP)
    )
    assert got.user is not None and got.user.name == "first"
    empty_first = request([("x-proxy-user", ""), ("x-proxy-user", "ignored"), ("x-remote-user", "next")], FP)
    got = requestheader.authenticate(config, empty_first)
    assert got.user is not None and got.user.name == "next"  # Go's Header.Get: the first value only


def test_front_proxy_without_username_falls_through() -> None:
    assert requestheader.authenticate(CONFIG, request([("x-remote-group", "system:masters")], FP)) is NOT_MINE


@pytest.mark.parametrize("cert", [None, USER, pki.make_ca(pki.FRONT_PROXY_CN).cert, pki.issue(FP_CA, "other").cert])
def test_headers_from_anyone_else_are_not_believed(cert: x509.Certificate | None) -> None:
    got = requestheader.authenticate(CONFIG, request(IMPERSONATION, cert))
    assert got.user is None
    assert (got.error is None) == (cert is None)  # a certificate that fails verification is an error, as kube


def test_a_verified_chain_that_expired_since_is_an_error() -> None:
    cert = FP
    later = Request(
        [(b"x-remote-user", b"a")],
        cert.not_valid_after_utc + dt.timedelta(seconds=1),
        cert,
        FRONT_PROXY.verify([cert], NOW),
    )
    assert requestheader.authenticate(CONFIG, later).error == "requestheader: expired"


def test_identity_headers_are_stripped_in_any_spelling() -> None:
    strip = IdentityHeaders([requestheader.STANDARD, RequestHeaderConfig(("X-Proxy-User",), (), (), ("X-P-",))])
    names = ["X-Remote-User", "x-remote-user", "X-REMOTE-GROUP", "x-remote-uid", "X-Remote-Extra-Anything"]
    names += ["x_remote_user", "X-Proxy-User", "x-p-foo", "x-remote-users", "accept"]
    headers = [(n.encode(), b"v") for n in names]
    kept, removed = strip.strip(headers)
    assert kept == [(b"x-remote-users", b"v"), (b"accept", b"v")] and removed == 8


def test_configured_names_with_underscores_are_stripped_in_every_spelling() -> None:
    """Configured names are folded like received ones (case, ``_`` and ``-``)."""
    config = RequestHeaderConfig(("X_User",), ("X-Remote-Uid",), ("X_Group",), ("X_Extra_",))
    strip = IdentityHeaders([requestheader.STANDARD, config])
    names = ["x_user", "X-USER", "x-user", "x_group", "X-Group", "x_extra_scopes", "X-EXTRA-reason", "x-users", "x"]
    kept, removed = strip.strip([(n.encode(), b"v") for n in names])
    assert kept == [(b"x-users", b"v"), (b"x", b"v")] and removed == 7


# --- x509 ----------------------------------------------------------------------------------------------


def named(*attributes: tuple[x509.ObjectIdentifier, str]) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])
    key = pki.new_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(CLIENT_CA.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(minutes=5))
        .not_valid_after(NOW + dt.timedelta(days=1))
        .sign(CLIENT_CA.key, hashes.SHA256())
    )


def test_client_certificate_user_is_cn_and_groups_are_o() -> None:
    got = x509_authn.authenticate(request([], USER))
    assert got.user is not None
    assert (got.user.name, got.user.groups) == ("jane", ("devs",))
    assert got.user.extra[CREDENTIAL_ID_KEY][0].startswith("X509SHA256=")


def test_go_reads_the_last_common_name_and_every_organization() -> None:
    cert = named(
        (NameOID.COMMON_NAME, "first"),
        (NameOID.ORGANIZATION_NAME, "o1"),
        (NameOID.COMMON_NAME, "last"),
        (NameOID.ORGANIZATION_NAME, "o2"),
    )
    got = x509_authn.authenticate(request([], cert))
    assert got.user is not None and (got.user.name, got.user.groups) == ("last", ("o1", "o2"))


@pytest.mark.parametrize("name", ["a,b", "a+O=system:masters", 'a"b', "a\\b", "CN=x", "système", "a\x00b"])
def test_special_characters_never_change_the_identity(name: str) -> None:
    got = x509_authn.authenticate(request([], named((NameOID.COMMON_NAME, name), (NameOID.ORGANIZATION_NAME, name))))
    assert got.user is not None and (got.user.name, got.user.groups) == (name, (name,))


def test_uid_attribute_rules() -> None:
    one = x509_authn.user_of(named((NameOID.COMMON_NAME, "u"), (NameOID.USER_ID, "id-1")))
    two = x509_authn.user_of(named((NameOID.COMMON_NAME, "u"), (NameOID.USER_ID, "a"), (NameOID.USER_ID, "b")))
    assert one.user is not None and one.user.uid == "id-1"
    assert two.error == "x509: expected 1 UID, but found multiple"
    empty = x509_authn.authenticate(request([], named((NameOID.COMMON_NAME, "alice"), (NameOID.USER_ID, ""))))
    assert empty.user is None and empty.error == "x509: UID cannot be an empty string"  # kube: 401


def test_certificate_without_cn_is_not_a_user() -> None:
    assert x509_authn.authenticate(request([], named((NameOID.ORGANIZATION_NAME, "o")))) is NOT_MINE


def test_unverified_client_certificate_is_an_error() -> None:
    assert x509_authn.authenticate(request([], FP)).error == "x509: untrusted-ca"
    assert x509_authn.authenticate(request([])) is NOT_MINE


# --- token file and bearer tokens ----------------------------------------------------------------------


def test_token_file_format(tmp_path: Path) -> None:
    data = b'tok1,alice,1,"g1,g2"\n\n,skipped,2\ntok2,bob,3\ntok1,alice2,4\n'
    tokens = tokenfile.parse(data, tmp_path / "t.csv")
    assert tokens == {"tok1": UserInfo("alice2", "4", ()), "tok2": UserInfo("bob", "3", ())}
    assert tokenfile.parse(b'tok,carol,5,"x,y"\n', tmp_path)["tok"].groups == ("x", "y")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"only-a-token-here,user\n", "line 1 must have at least 3 columns (token, user name, user uid), found 2"),
        (b'a,b,c\n"unterminated,b,c\n', "line 2 is not valid CSV"),
        (b"", "holds no token"),
        (b",user,uid\n", "holds no token"),
        (b"\xff\xfe,user,uid\n", "not UTF-8 text"),
    ],
)
def test_bad_token_files_are_refused_without_showing_tokens(data: bytes, problem: str) -> None:
    with pytest.raises(CredentialError) as refused:
        tokenfile.parse(data, Path("tokens.csv"))
    assert str(refused.value) == f"--token-auth-file: tokens.csv: {problem}"
    assert "only-a-token" not in str(refused.value)


@pytest.mark.parametrize(
    ("header", "outcome"),
    [
        ("Bearer s3cret-token", "tok-user"),
        ("bearer s3cret-token  ", "tok-user"),
        ("bearer   s3cret-token", "not-mine"),  # split on single spaces: the token part is empty
        ("BEARER s3cret-token extra", "tok-user"),
        ("Bearer wrong", "error"),
        ("Bearer  s3cret-token", "not-mine"),  # two spaces: an empty token, as kube (a warning there)
        ("Basic s3cret-token", "not-mine"),
        ("Bearer", "not-mine"),
    ],
)
def test_bearer_tokens(header: str, outcome: str) -> None:
    got = bearertoken.authenticate(TOKENS, request([("authorization", header)]))
    kind = got.user.name if got.user else ("error" if got.error else "not-mine")
    assert kind == outcome


def test_only_the_first_authorization_header_counts() -> None:
    """kube reads ``req.Header.Get("Authorization")``: the first value."""
    good, bad = ("Authorization", "Bearer s3cret-token"), ("Authorization", "Bearer wrong")
    assert bearertoken.authenticate(TOKENS, request([good, bad])).user is not None
    assert bearertoken.authenticate(TOKENS, request([bad, good])).error == "invalid bearer token"


# --- the chain -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "cert", "expected"),
    [
        ([], None, (ANONYMOUS, (ALL_UNAUTHENTICATED,))),
        (IMPERSONATION, None, (ANONYMOUS, (ALL_UNAUTHENTICATED,))),
        (IMPERSONATION, FP, ("system:admin", ("system:masters", ALL_AUTHENTICATED))),
        (IMPERSONATION, USER, ("jane", ("devs", ALL_AUTHENTICATED))),
        ([("authorization", "Bearer s3cret-token"), *IMPERSONATION], None, ("tok-user", ("a", "b", ALL_AUTHENTICATED))),
        ([("authorization", "Bearer s3cret-token")], FP, ("tok-user", ("a", "b", ALL_AUTHENTICATED))),
        # kube's union tries x509 before the token file and stops at the first success: an unknown bearer
        # (an OpenAI client's sk-... or EMPTY) beside a valid client certificate is never looked at
        ([("authorization", "Bearer sk-unknown")], USER, ("jane", ("devs", ALL_AUTHENTICATED))),
        ([("x-remote-user", "u"), ("x-remote-group", ALL_UNAUTHENTICATED)], FP, ("u", (ALL_UNAUTHENTICATED,))),
    ],
)
def test_chain_outcomes(headers, cert, expected) -> None:
    got = full_chain()(request(headers, cert))
    assert got.user is not None and (got.user.name, got.user.groups) == expected


@pytest.mark.parametrize(
    ("headers", "cert"),
    [
        ([("authorization", "Bearer wrong")], None),  # a bad token is never anonymous
        ([("authorization", "Bearer wrong")], FP),
        ([], FP),  # the front proxy without a user: its certificate is not a client certificate (kube: 401)
        (IMPERSONATION, pki.issue(FP_CA, "not-the-proxy").cert),
        (IMPERSONATION, pki.make_ca(pki.FRONT_PROXY_CN).cert),
    ],
)
def test_chain_failures_are_errors_not_anonymous(headers, cert) -> None:
    got = full_chain()(request(headers, cert))
    assert got.user is None and got.error


def test_without_anonymous_auth_nothing_is_not_a_user() -> None:
    assert full_chain(anonymous=False)(request([])) is NOT_MINE


def test_chain_without_client_ca_lets_the_front_proxy_be_anonymous() -> None:
    only_fp = chain(requestheader_config=CONFIG, client_certs=False, tokens=None, anonymous_auth=True)
    got = only_fp(request([], FP))
    assert got.user is not None and got.user.name == ANONYMOUS


def test_front_proxy_check_missing_means_no_certificate() -> None:
    bare = Request([(b"x-remote-user", b"x")], NOW, FP, NO_CERTIFICATE, NO_CERTIFICATE)
    assert requestheader.authenticate(CONFIG, bare).error == "requestheader: no-certificate"


# --- bodies --------------------------------------------------------------------------------------------


def test_self_subject_review_omits_empty_fields() -> None:
    assert review.self_subject_review(UserInfo(ANONYMOUS, groups=(ALL_UNAUTHENTICATED,))) == {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": {"username": ANONYMOUS, "groups": [ALL_UNAUTHENTICATED]}},
    }
    full = review.user_info(UserInfo("a", "1", ("g",), {"k": ("v", "w")}))
    assert full == {"username": "a", "uid": "1", "groups": ["g"], "extra": {"k": ["v", "w"]}}


def test_requestheader_missing_user_anonymous_is_a_named_deviation() -> None:
    """Not kube: with it, a front proxy naming no user is anonymous; anything else is unchanged."""
    lenient = chain(
        requestheader_config=CONFIG,
        client_certs=True,
        tokens=TOKENS,
        anonymous_auth=True,
        proxy_without_user_is_anonymous=True,
    )
    got = lenient(request([], FP))
    assert got.user is not None and got.user.name == ANONYMOUS
    for headers, cert in [([("authorization", "Bearer wrong")], FP), (IMPERSONATION, pki.issue(FP_CA, "other").cert)]:
        assert lenient(request(headers, cert)).error  # bad credentials stay errors
    named = lenient(request(IMPERSONATION, FP))
    assert named.user is not None and named.user.name == "system:admin"


def test_upstream_headers_as_the_aggregator_sends_them() -> None:
    user = UserInfo("jane", "u-1", ("ops", ALL_AUTHENTICATED), {"reason/why": ("a", "b"), "100%": ("x",)})
    assert requestheader.upstream_headers(user) == [
        (b"x-remote-user", b"jane"),
        (b"x-remote-uid", b"u-1"),
        (b"x-remote-group", b"ops"),
        (b"x-remote-group", ALL_AUTHENTICATED.encode()),
        (b"x-remote-extra-reason%2fwhy", b"a"),
        (b"x-remote-extra-reason%2fwhy", b"b"),
        (b"x-remote-extra-100%25", b"x"),
    ]
    assert requestheader.upstream_headers(UserInfo(ANONYMOUS)) == [(b"x-remote-user", ANONYMOUS.encode())]


def test_upstream_headers_use_the_first_configured_name_of_each_list() -> None:
    config = RequestHeaderConfig(("X-U1", "X-U2"), ("X-I1", "X-I2"), ("X-G1", "X-G2"), ("X-E1-", "X-E2-"))
    user = UserInfo("jane", "u-1", ("ops",), {"k": ("v",)})
    assert requestheader.upstream_headers(user, config) == [
        (b"x-u1", b"jane"),
        (b"x-i1", b"u-1"),
        (b"x-g1", b"ops"),
        (b"x-e1-k", b"v"),
    ]


def test_a_failed_authentication_answers_kube_s_401_status() -> None:
    status = review.UNAUTHORIZED_STATUS
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        "Unauthorized",
        401,
    )


@pytest.mark.parametrize("key", ["reason/why", "100%", "a b", "ключ", "x.y-z_~"])
def test_extra_keys_survive_the_round_trip(key: str) -> None:
    """What the aggregator escapes, the requestheader authenticator unescapes to the same key."""
    (header,) = [h for h in requestheader.upstream_headers(UserInfo("u", extra={key: ("v",)})) if b"extra" in h[0]]
    got = requestheader.authenticate(
        CONFIG, Request([(b"x-remote-user", b"u"), header], NOW, FP, FRONT_PROXY.verify([FP], NOW))
    )
    assert got.user is not None and dict(got.user.extra) == {key.lower(): ("v",)}


def test_an_extra_key_with_a_malformed_escape_is_kept_whole() -> None:
    """Go's url.PathUnescape fails on a malformed escape and kube keeps the key as sent: the valid escape
    before it is not decoded either."""
    assert requestheader.unescape_extra_key("a%41%zz") == "a%41%zz"
    assert requestheader.unescape_extra_key("a%41") == "aA"
