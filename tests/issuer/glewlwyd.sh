#!/usr/bin/env bash
# tests/issuer/glewlwyd.sh DIR PORT: a real OAuth 2.1 / OpenID Connect issuer for the tests,
# Debian's glewlwyd (installed by scripts/test-setup.sh), configured with no manual step: its
# config, sqlite database and keys go into DIR, and /usr/bin/glewlwyd serves 127.0.0.1:PORT.
# Prints the issuer URL once its discovery document answers.
#
#   issuer     http://127.0.0.1:PORT/api/oidc
#   discovery  $issuer/.well-known/openid-configuration   (glewlwyd has no RFC 8414 document)
#   client     test-client / test-secret   (client_credentials, password, refresh_token, code)
#   user       alice / alice-password      (sub "alice")
#   scopes     file-agent.run file-agent.saved-tools (+ openid)
#   resources  RFC 8707 "resource" accepted for $ISSUER_RESOURCES (space separated, default
#              http://127.0.0.1:8000/mcp); it becomes the token's "aud". Without it, "aud" is
#              the scope list: a token for no resource.
#
# Access tokens are RS256 JWTs (header typ at+jwt, kid of the newest key).
# Stop:   SIGTERM to this script with ISSUER_FOREGROUND=1 (it stays the server's parent and
#         forwards the signal), else kill -TERM "$(cat DIR/glewlwyd.pid)".
# Rotate: stop, run again on DIR with ISSUER_ROTATE_KEY=1: a new key signs, the old one stays in
#         the JWKS.
# Env:    ISSUER_CLIENT_ID, ISSUER_CLIENT_SECRET, ISSUER_USER, ISSUER_USER_PASSWORD,
#         ISSUER_RESOURCES, ISSUER_REDIRECT_URI, ISSUER_LOG_LEVEL (INFO),
#         ISSUER_ALG (RS256|RS384|RS512|PS256|PS384|PS512, default RS256),
#         ISSUER_TIMEOUT (seconds to wait for readiness, default 30), ISSUER_FOREGROUND.
set -euo pipefail

DIR=${1:?usage: $0 DIR PORT}
PORT=${2:?usage: $0 DIR PORT}
CLIENT_ID=${ISSUER_CLIENT_ID:-test-client}
CLIENT_SECRET=${ISSUER_CLIENT_SECRET:-test-secret}
USER_NAME=${ISSUER_USER:-alice}
USER_PASSWORD=${ISSUER_USER_PASSWORD:-alice-password}
RESOURCES=${ISSUER_RESOURCES:-http://127.0.0.1:8000/mcp}
ALG=${ISSUER_ALG:-RS256}
REDIRECT_URI=${ISSUER_REDIRECT_URI:-http://127.0.0.1:8000/callback}
TIMEOUT=${ISSUER_TIMEOUT:-30}

log() { echo "glewlwyd.sh: $*" >&2; }

# ---------------------------------------------------------------- 1. installed?
# scripts/test-setup.sh installs glewlwyd (with its service left off); this script only runs it.
if [ ! -x /usr/bin/glewlwyd ] || ! command -v sqlite3 >/dev/null || ! command -v openssl >/dev/null \
   || ! command -v curl >/dev/null; then
  log "glewlwyd, sqlite3, openssl or curl is missing: run scripts/test-setup.sh"; exit 1
fi

# ---------------------------------------------------------------- 2. config
mkdir -p "$DIR/keys"
DIR=$(cd "$DIR" && pwd)
ISSUER="http://127.0.0.1:$PORT/api/oidc"
DB="$DIR/glewlwyd.db"

alive() { # pid is a live (not zombie) glewlwyd
  [ -r "/proc/$1/stat" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = glewlwyd ] \
    && ! awk '{exit !($3=="Z")}' "/proc/$1/stat"
}
if [ -f "$DIR/glewlwyd.pid" ] && alive "$(cat "$DIR/glewlwyd.pid")"; then
  log "already running (pid $(cat "$DIR/glewlwyd.pid")); stop it first"; exit 1
fi

cat > "$DIR/glewlwyd.conf" <<EOF
port=$PORT
bind_address="127.0.0.1"
external_url="http://127.0.0.1:$PORT"
login_url="login.html"
api_prefix="api"
allow_origin="*"
log_mode="file"
log_level="${ISSUER_LOG_LEVEL:-INFO}"
log_file="$DIR/glewlwyd.log"
cookie_secure=0
session_expiration=2419200
session_key="GLEWLWYD2_SESSION_ID"
admin_scope="g_admin"
profile_scope="g_profile"
user_module_path="/usr/lib/glewlwyd/user"
client_module_path="/usr/lib/glewlwyd/client"
user_auth_scheme_module_path="/usr/lib/glewlwyd/scheme"
plugin_module_path="/usr/lib/glewlwyd/plugin"
hash_algorithm="SHA512"
database =
{
  type = "sqlite3"
  path = "$DB"
};
EOF

# ---------------------------------------------------------------- keys
# RSA keys as PEM; the newest key (keys/NNN.pem, highest NNN) signs.
new_key() {
  local n; n=$(printf '%03d' $(( $(ls "$DIR/keys" | grep -c '\.pem$' || true) + 1 )))
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$DIR/keys/$n.pem" 2>/dev/null
  log "generated RSA key keys/$n.pem"
}
ls "$DIR/keys"/*.pem >/dev/null 2>&1 || new_key
[ "${ISSUER_ROTATE_KEY:-0}" = 1 ] && new_key

# Build the private JWKS (RSA private key -> JWK) with openssl + awk only.
b64url_hex() { local h; h=$(cat); printf "$(printf '%s' "$h" | sed 's/../\\x&/g')" | base64 -w0 | tr '+/' '-_' | tr -d '='; }
pem_to_jwk() { # $1 pem, $2 kid
  local txt; txt=$(openssl pkey -in "$1" -noout -text 2>/dev/null)
  field() { # hex of an INTEGER field in openssl -text output, leading 00 stripped
    echo "$txt" | awk -v f="$1:" '
      $1==f {on=1; next}
      on && /^[a-zA-Z]/ {on=0}
      on {gsub(/[ :]/,""); printf "%s",$0}' | sed 's/^\(00\)*//'
  }
  local e; e=$(echo "$txt" | awk '/^publicExponent:/{print $2}')
  e=$(printf '%06x' "$e" | sed 's/^\(00\)*//')
  printf '{"kty":"RSA","kid":"%s","alg":"%s","use":"sig","n":"%s","e":"%s","d":"%s","p":"%s","q":"%s","dp":"%s","dq":"%s","qi":"%s"}' \
    "$2" "$ALG" \
    "$(field modulus | b64url_hex)" "$(echo "$e" | b64url_hex)" \
    "$(field privateExponent | b64url_hex)" "$(field prime1 | b64url_hex)" \
    "$(field prime2 | b64url_hex)" "$(field exponent1 | b64url_hex)" \
    "$(field exponent2 | b64url_hex)" "$(field coefficient | b64url_hex)"
}
JWKS='{"keys":['
first=1
for pem in $(ls "$DIR/keys"/*.pem | sort -r); do   # newest first = default signer
  kid="key-$(basename "$pem" .pem)-$(openssl pkey -in "$pem" -pubout -outform DER 2>/dev/null | sha256sum | cut -c1-12)"
  [ $first = 1 ] || JWKS+=','
  JWKS+=$(pem_to_jwk "$pem" "$kid")
  first=0
done
JWKS+=']}'
printf '%s' "$JWKS" > "$DIR/jwks-private.json"
chmod 600 "$DIR/jwks-private.json" "$DIR/keys"/*.pem

# ---------------------------------------------------------------- 3. database
sqlq() { printf "%s" "$1" | sed "s/'/''/g"; }
pbkdf2_hash() { # glewlwyd sqlite format: base64(pbkdf2_sha256(pw, salt, 1000, 32) || salt)
  local salt; salt=$(openssl rand -base64 24 | tr -dc 'A-Za-z0-9' | cut -c1-16)
  { openssl kdf -keylen 32 -kdfopt digest:SHA256 -kdfopt "pass:$1" -kdfopt "salt:$salt" \
      -kdfopt iter:1000 -binary PBKDF2; printf '%s' "$salt"; } | base64 -w0
}

if [ ! -s "$DB" ]; then
  zcat /usr/share/doc/glewlwyd/database/init.sqlite3.sql.gz | sqlite3 "$DB"
  C=$(sqlq "$CLIENT_ID"); S=$(sqlq "$CLIENT_SECRET"); U=$(sqlq "$USER_NAME")
  R=$(sqlq "$REDIRECT_URI"); H=$(pbkdf2_hash "$USER_PASSWORD")
  sqlite3 "$DB" <<EOF
INSERT INTO g_scope (gs_name, gs_display_name, gs_description, gs_password_required, gs_password_max_age)
  VALUES ('file-agent.run', 'file-agent.run', 'Call file-agent tools', 0, 0), ('file-agent.saved-tools', 'file-agent.saved-tools', 'Create and delete saved tools', 0, 0);
INSERT INTO g_client (gc_client_id, gc_name, gc_description, gc_confidential, gc_enabled)
  VALUES ('$C', '$C', 'test client', 1, 1);
INSERT INTO g_client_property (gc_id, gcp_name, gcp_value)
  SELECT gc_id, p.n, p.v FROM g_client,
    (SELECT 'client_secret' AS n, '$S' AS v UNION ALL
     SELECT 'authorization_type', 'client_credentials' UNION ALL
     SELECT 'authorization_type', 'password' UNION ALL
     SELECT 'authorization_type', 'refresh_token' UNION ALL
     SELECT 'authorization_type', 'code' UNION ALL
     SELECT 'redirect_uri', '$R' UNION ALL
     SELECT 'token_endpoint_auth_method', 'client_secret_basic' UNION ALL
     SELECT 'token_endpoint_auth_method', 'client_secret_post') AS p
  WHERE gc_client_id = '$C';
INSERT INTO g_client_scope (gcs_name) VALUES ('file-agent.run'), ('file-agent.saved-tools'), ('openid');
INSERT INTO g_client_scope_client (gc_id, gcs_id)
  SELECT (SELECT gc_id FROM g_client WHERE gc_client_id = '$C'), gcs_id FROM g_client_scope;
INSERT INTO g_user (gu_username, gu_name, gu_email, gu_enabled) VALUES ('$U', '$U', '', 1);
INSERT INTO g_user_password (gu_id, guw_password) SELECT gu_id, '$H' FROM g_user WHERE gu_username = '$U';
INSERT OR IGNORE INTO g_user_scope (gus_name) VALUES ('file-agent.run'), ('file-agent.saved-tools'), ('openid');
INSERT INTO g_user_scope_user (gu_id, gus_id)
  SELECT (SELECT gu_id FROM g_user WHERE gu_username = '$U'), gus_id FROM g_user_scope
  WHERE gus_name IN ('file-agent.run', 'file-agent.saved-tools', 'openid');
-- consent already given by the user to the client (headless authorization_code flow)
INSERT INTO g_client_user_scope (gs_id, gcus_username, gcus_client_id)
  SELECT gs_id, '$U', '$C' FROM g_scope WHERE gs_name IN ('openid', 'file-agent.run', 'file-agent.saved-tools');
-- make the user's "sub" equal to the username instead of a random 32-char id
INSERT INTO gpo_subject_identifier (gposi_plugin_name, gposi_username, gposi_sub) VALUES ('oidc', '$U', '$U');
INSERT INTO g_plugin_module_instance (gpmi_module, gpmi_name, gpmi_display_name, gpmi_parameters)
  VALUES ('oidc', 'oidc', 'OpenID Connect', '{}');
EOF
fi

# Plugin parameters are (re)written on every start so key rotation = rerun.
RES_JSON=$(for r in $RESOURCES; do printf '"%s",' "$r"; done | sed 's/,$//')
PARAMS=$(cat <<EOF
{
  "iss": "$ISSUER",
  "jwt-type": "rsa", "jwt-key-size": "256",
  "jwks-show": true, "default-kid": "",
  "access-token-duration": 3600, "refresh-token-duration": 1209600, "code-duration": 600,
  "refresh-token-rolling": true, "allow-non-oidc": true,
  "auth-type-code-enabled": true, "auth-type-token-enabled": false, "auth-type-none-enabled": false,
  "auth-type-password-enabled": true, "auth-type-client-enabled": true,
  "auth-type-device-enabled": false, "auth-type-refresh-enabled": true,
  "subject-type": "public",
  "allowed-scope": ["openid", "file-agent.run", "file-agent.saved-tools"],
  "scope": [],
  "introspection-revocation-allowed": true, "introspection-revocation-allow-target-client": true,
  "resource-allowed": true,
  "resource-scope": {"file-agent.run": [$RES_JSON], "file-agent.saved-tools": [$RES_JSON]},
  "resource-client-property": "resource", "resource-scope-and-client-property": false,
  "pkce-allowed": true
}
EOF
)
sqlite3 "$DB" "UPDATE g_plugin_module_instance SET gpmi_enabled = 1,
  gpmi_parameters = json_set(json('$(sqlq "$PARAMS")'), '\$.jwks-private', CAST(readfile('$DIR/jwks-private.json') AS TEXT))
  WHERE gpmi_name = 'oidc';"

# ---------------------------------------------------------------- 4. start
: > "$DIR/glewlwyd.log"
t0=$(date +%s.%N)
/usr/bin/glewlwyd --config-file="$DIR/glewlwyd.conf" >>"$DIR/glewlwyd.out" 2>&1 </dev/null &
PID=$!
echo "$PID" > "$DIR/glewlwyd.pid"

deadline=$(( $(date +%s) + TIMEOUT ))
until curl -fsS -o /dev/null "$ISSUER/.well-known/openid-configuration" 2>/dev/null; do
  if ! kill -0 "$PID" 2>/dev/null; then
    log "glewlwyd exited early; last log lines:"; tail -n 30 "$DIR/glewlwyd.log" "$DIR/glewlwyd.out" >&2; exit 1
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    log "not ready after ${TIMEOUT}s"; kill -TERM "$PID" 2>/dev/null || true; tail -n 30 "$DIR/glewlwyd.log" >&2; exit 1
  fi
  sleep 0.05
done
log "ready in $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}")s (pid $PID)"
echo "$ISSUER"

# ISSUER_FOREGROUND=1: stay in the foreground as the server's parent, so the caller
# can SIGTERM this script (forwarded) and reap everything itself.
if [ "${ISSUER_FOREGROUND:-0}" = 1 ]; then
  trap 'kill -TERM "$PID" 2>/dev/null; wait "$PID"; rm -f "$DIR/glewlwyd.pid"; exit 0' TERM INT
  wait "$PID"
fi
