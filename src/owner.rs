//! Whose data something is: the one owner key. Every kind of data a caller owns is filed under
//! the same [`Owner`]: the outputs and uploads of the local store (`storage`), what
//! `resources/list` lists and `resources/read` reads, inputs named by id or URI, saved tools
//! (`tools::dynamic`), and the review page's per-user rows (through the audit line's `owner`).
//! `identity::Identity::owner` is the one place that makes one from a request's identity; this
//! module is the format, and nothing else in the crate writes an owner string.
//!
//! A key names everything that vouched for the caller, so that two callers that share a user
//! name but not the voucher never share data:
//!
//! | caller | key |
//! |---|---|
//! | stdio (the one user who started the server) | `local` |
//! | HTTP, no user and no access token (an open, loopback-only server) | `anonymous` |
//! | an access token, no user | `token:<token id>` |
//! | a user named by `<source>` (`header`, `openwebui-jwt`, `openwebui-session`) with a token | `token:<token id>/<source>:<user>` |
//! | the same without a token | `<source>:<user>` |
//! | an OAuth user | `oauth:<issuer>/user:<user>` |
//! | a user was required (Open WebUI's signed mode) but not proven | `unproven:<token id>` |
//!
//! The last kind owns what it makes, but never reads or lists an owned file back: several
//! people share it (everyone whose signed token was missing or refused), so it is no one's
//! space. Its files are reached only by the download link its answer gives.
//!
//! Values are percent-encoded for `%` and `/`, so a key splits back into its parts one way
//! only: an issuer ending in `/user:x` cannot make another issuer's user. The token id is the
//! first 16 hex digits of the token's SHA-256 (`server::auth::token_id`), never the token.
//!
//! Data written before these keys (by builds before this change) carries the older, coarser owners
//! that [`Owner::files_before`] and [`Owner::tools_before`] give; CHANGELOG's upgrade notes
//! say what becomes of it, and [`Owner::may_read`] and the saved tools' adoption apply it.

use std::fmt;

/// The key of the one user of a stdio server.
const LOCAL: &str = "local";
/// The key of HTTP callers that name nobody (no user, no access token).
const ANONYMOUS: &str = "anonymous";

/// Whose data it is: see the module's table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The key, as stored beside a file and hashed into a saved tools' folder.
    key: String,
    /// The owner this caller's files carried before owner keys (`user:<id>`), when it had one.
    files_before: Option<String>,
    /// The space this caller's saved tools had before owner keys, when it differs from `key`.
    tools_before: Option<String>,
    /// A user was required and not proven: nothing owned is read or listed back.
    unproven: bool,
}

impl Owner {
    /// The one user of a stdio server.
    pub fn local() -> Self {
        Self::plain(LOCAL.to_string())
    }

    /// An HTTP caller with neither a user nor an access token.
    pub fn anonymous() -> Self {
        Self::plain(ANONYMOUS.to_string())
    }

    /// A caller admitted by access token `token_id` that names no user.
    pub fn token(token_id: &str) -> Self {
        Self::plain(key(&[("token", token_id)]))
    }

    /// A caller whose user was required (Open WebUI's signed mode) but not proven, admitted by
    /// access token `token_id` if any.
    pub fn unproven(token_id: Option<&str>) -> Self {
        Self {
            unproven: true,
            ..Self::plain(key(&[("unproven", token_id.unwrap_or("-"))]))
        }
    }

    /// User `id` of OAuth issuer `issuer`.
    pub fn oauth(issuer: &str, id: &str) -> Self {
        Self {
            key: key(&[("oauth", issuer), ("user", id)]),
            files_before: Some(format!("user:{id}")),
            tools_before: Some(format!("oauth:{issuer}/user:{id}")),
            unproven: false,
        }
    }

    /// User `id` as `source` (`header`, `openwebui-jwt`, `openwebui-session`) named them,
    /// within access token `token_id` when the request carried one.
    pub fn user(source: &str, token_id: Option<&str>, id: &str) -> Self {
        let (key_text, tools_before) = match token_id {
            Some(token) => (
                key(&[("token", token), (source, id)]),
                format!("token:{token}/user:{id}"),
            ),
            None => (key(&[(source, id)]), format!("user:{id}")),
        };
        Self {
            key: key_text,
            files_before: Some(format!("user:{id}")),
            tools_before: Some(tools_before),
            unproven: false,
        }
    }

    fn plain(key: String) -> Self {
        Self {
            key,
            files_before: None,
            tools_before: None,
            unproven: false,
        }
    }

    /// Whether the key is shared by callers who name no one (`anonymous`, and every unproven
    /// caller of one token), so that it cannot tell one of them from another.
    pub fn names_no_one(&self) -> bool {
        self.unproven || self.key == ANONYMOUS
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.key
    }

    /// Whether this caller may read, by its id or resource URI, a stored file whose recorded
    /// owner is `stored`: its own; one nobody known made (`None`: an upload from before
    /// uploads had owners); or one from before owner keys whose `user:<id>` is this caller's
    /// user id. The last kind is never listed ([`Self::lists`]): that old owner named a user
    /// id whatever vouched for it, so who else shares it cannot be told.
    pub fn may_read(&self, stored: Option<&str>) -> bool {
        match stored {
            None => true,
            Some(_) if self.unproven => false,
            Some(stored) => stored == self.key || self.files_before.as_deref() == Some(stored),
        }
    }

    /// Whether `resources/list` shows this caller a file whose recorded owner is `stored`:
    /// only its own key.
    pub fn lists(&self, stored: &str) -> bool {
        !self.unproven && stored == self.key
    }

    /// The space this caller's saved tools were kept in before owner keys, when it is not
    /// [`Self::as_str`]: the tools there are this caller's to adopt. Several of today's keys
    /// map back to one old space (the sources of one token's user), but all of them could use
    /// it before; the first to come adopts it, so access never widens.
    pub fn tools_before(&self) -> Option<&str> {
        self.tools_before
            .as_deref()
            .filter(|before| *before != self.key)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

/// `name:value` parts joined by `/`, each value with `%` and `/` percent-encoded.
fn key(parts: &[(&str, &str)]) -> String {
    parts
        .iter()
        .map(|(name, value)| {
            let value = value.replace('%', "%25").replace('/', "%2F");
            format!("{name}:{value}")
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_everything_that_vouched_and_split_back_one_way_only() {
        assert_eq!(Owner::local().as_str(), "local");
        assert_eq!(Owner::anonymous().as_str(), "anonymous");
        assert_eq!(Owner::token("abcd").as_str(), "token:abcd");
        assert_eq!(
            Owner::user("header", Some("abcd"), "alice").as_str(),
            "token:abcd/header:alice"
        );
        assert_eq!(
            Owner::user("openwebui-session", None, "alice").as_str(),
            "openwebui-session:alice"
        );
        assert_eq!(
            Owner::oauth("https://idp.example", "alice").as_str(),
            "oauth:https:%2F%2Fidp.example/user:alice"
        );
        // An issuer that ends like a user and a user that starts like one stay apart.
        assert_ne!(
            Owner::oauth("https://a/user:x", "y"),
            Owner::oauth("https://a", "x/user:y")
        );
        assert_ne!(
            Owner::user("header", Some("a"), "b"),
            Owner::user("header", None, "token:a/header:b")
        );
    }

    #[test]
    fn old_files_are_read_by_the_same_user_id_and_listed_for_nobody() {
        let alice_a = Owner::user("header", Some("aaaa"), "alice");
        let alice_b = Owner::user("header", Some("bbbb"), "alice");
        assert!(alice_a.may_read(Some(alice_a.as_str())));
        assert!(!alice_b.may_read(Some(alice_a.as_str())));
        assert!(alice_b.may_read(Some("user:alice")), "as before the keys");
        assert!(!alice_b.lists("user:alice"));
        assert!(!Owner::user("header", None, "bob").may_read(Some("user:alice")));
        assert!(
            !Owner::token("aaaa").may_read(Some("user:alice")),
            "a token without a user never read a user's file by its owner"
        );
        assert!(Owner::token("aaaa").may_read(None), "an unowned old upload");
        assert!(Owner::local().may_read(Some("local")));
        assert!(!Owner::anonymous().may_read(Some("local")));
    }

    #[test]
    fn an_unproven_caller_reads_and_lists_nothing_owned_not_even_its_own() {
        let unproven = Owner::unproven(Some("aaaa"));
        assert_eq!(unproven.as_str(), "unproven:aaaa");
        assert!(!unproven.may_read(Some(unproven.as_str())));
        assert!(!unproven.lists(unproven.as_str()));
        assert!(!unproven.may_read(Some("token:aaaa")));
        assert!(unproven.may_read(None));
        assert_ne!(unproven, Owner::token("aaaa"));
    }

    #[test]
    fn only_anonymous_and_unproven_callers_name_no_one() {
        assert!(Owner::anonymous().names_no_one());
        assert!(Owner::unproven(Some("aaaa")).names_no_one());
        assert!(Owner::unproven(None).names_no_one());
        for named in [
            Owner::local(),
            Owner::token("aaaa"),
            Owner::user("header", None, "anonymous"),
            Owner::oauth("https://idp.example", "alice"),
        ] {
            assert!(!named.names_no_one(), "{named}");
        }
    }

    /// One owner format: outside this module (and tests), no code spells an owner key. The
    /// bug this replaced was a second format (`user:<id>`, written by the MCP layer for files
    /// beside `identity`'s for saved tools), which let two tokens' "alice" share files.
    #[test]
    fn no_other_module_writes_an_owner_key() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        crate::layering::rust_files(&src, &mut files);
        let spellings = [
            "\"user:",
            "\"token:",
            "\"oauth:",
            "\"unproven:",
            "user:{",
            "token:{",
            "oauth:{",
            "/user:",
        ];
        let mut found = Vec::new();
        for file in files.iter().filter(|file| !file.ends_with("owner.rs")) {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for (number, line) in code.lines().enumerate() {
                let line = line.split("//").next().unwrap_or_default();
                if let Some(spelling) = spellings.iter().find(|s| line.contains(*s)) {
                    found.push(format!("{}:{}: {spelling}", file.display(), number + 1));
                }
            }
        }
        assert!(
            found.is_empty(),
            "owner keys are made in src/owner.rs only (identity::Identity::owner):\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn only_keys_that_changed_have_tools_to_adopt() {
        assert_eq!(Owner::local().tools_before(), None);
        assert_eq!(Owner::token("abcd").tools_before(), None);
        assert_eq!(
            Owner::user("openwebui-jwt", Some("abcd"), "alice").tools_before(),
            Some("token:abcd/user:alice")
        );
        assert_eq!(
            Owner::oauth("https://idp.example", "alice").tools_before(),
            Some("oauth:https://idp.example/user:alice")
        );
    }
}
