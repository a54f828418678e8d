//! The signed client assertion of OAuth's `private_key_jwt` (RFC 7523 §2.2, RFC 7521 §4.2): a
//! JWT naming toolgate's client, valid for a minute, signed with the client's private key and
//! sent instead of a client secret. The key is PEM, PKCS#8 (RSA, EC P-256 or P-384, Ed25519) or
//! PKCS#1 (RSA); the algorithm follows from it. Signed with ring, the crypto already in the tree.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, RsaKeyPair};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

/// How long an assertion is valid: enough for one token request, too short to be worth stealing.
const LIFETIME_SECS: u64 = 60;

/// A private key toolgate signs its client assertions with.
pub(crate) struct SigningKey {
    pair: Pair,
}

enum Pair {
    Rsa(RsaKeyPair),
    Ecdsa(EcdsaKeyPair, &'static str),
    Ed25519(Ed25519KeyPair),
}

/// Why a key file cannot sign.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("no PEM private key in the file")]
    NotPem,
    #[error(
        "an EC key in SEC1 form ('BEGIN EC PRIVATE KEY'): convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt`"
    )]
    Sec1,
    #[error("a key toolgate cannot sign with: use RSA, EC P-256 or P-384, or Ed25519")]
    Unsupported,
    #[error("signing failed")]
    Signing,
}

impl SigningKey {
    /// The key in `pem` (the first private key in it).
    pub(crate) fn from_pem(pem: &str) -> Result<Self, KeyError> {
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| KeyError::NotPem)?;
        let pair = match &der {
            PrivateKeyDer::Pkcs1(key) => Pair::Rsa(
                RsaKeyPair::from_der(key.secret_pkcs1_der()).map_err(|_| KeyError::Unsupported)?,
            ),
            PrivateKeyDer::Pkcs8(key) => pkcs8(key.secret_pkcs8_der())?,
            PrivateKeyDer::Sec1(_) => return Err(KeyError::Sec1),
            _ => return Err(KeyError::Unsupported),
        };
        Ok(SigningKey { pair })
    }

    /// The JWS algorithm the key signs with.
    pub(crate) fn algorithm(&self) -> &'static str {
        match &self.pair {
            Pair::Rsa(_) => "RS256",
            Pair::Ecdsa(_, alg) => alg,
            Pair::Ed25519(_) => "EdDSA",
        }
    }

    /// An assertion that `client_id` is asking `audience` (the authorization server) for a
    /// token, issued at `now` (seconds since the epoch), with `key_id` as its `kid` if set.
    pub(crate) fn assertion(
        &self,
        client_id: &str,
        audience: &str,
        key_id: Option<&str>,
        now: u64,
    ) -> Result<String, KeyError> {
        let rng = SystemRandom::new();
        let mut jti = [0u8; 16];
        rng.fill(&mut jti).map_err(|_| KeyError::Signing)?;
        let mut header = json!({"alg": self.algorithm(), "typ": "JWT"});
        if let Some(kid) = key_id {
            header["kid"] = json!(kid);
        }
        let claims = json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + LIFETIME_SECS,
            "jti": jti.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        });
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self.sign(input.as_bytes(), &rng)?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    fn sign(&self, message: &[u8], rng: &SystemRandom) -> Result<Vec<u8>, KeyError> {
        match &self.pair {
            Pair::Rsa(pair) => {
                let mut signature = vec![0; pair.public().modulus_len()];
                pair.sign(&signature::RSA_PKCS1_SHA256, rng, message, &mut signature)
                    .map_err(|_| KeyError::Signing)?;
                Ok(signature)
            }
            Pair::Ecdsa(pair, _) => pair
                .sign(rng, message)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| KeyError::Signing),
            Pair::Ed25519(pair) => Ok(pair.sign(message).as_ref().to_vec()),
        }
    }
}

/// A PKCS#8 key of any kind ring signs with: the kinds are tried in turn.
fn pkcs8(der: &[u8]) -> Result<Pair, KeyError> {
    if let Ok(pair) = RsaKeyPair::from_pkcs8(der) {
        return Ok(Pair::Rsa(pair));
    }
    let rng = SystemRandom::new();
    let curves = [
        (&signature::ECDSA_P256_SHA256_FIXED_SIGNING, "ES256"),
        (&signature::ECDSA_P384_SHA384_FIXED_SIGNING, "ES384"),
    ];
    for (curve, alg) in curves {
        if let Ok(pair) = EcdsaKeyPair::from_pkcs8(curve, der, &rng) {
            return Ok(Pair::Ecdsa(pair, alg));
        }
    }
    Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
        .map(Pair::Ed25519)
        .map_err(|_| KeyError::Unsupported)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::KeyPair as _;

    fn pem(der: &[u8]) -> String {
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        )
    }

    fn decode(part: &str) -> serde_json::Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn an_ec_assertion_names_the_client_and_the_server_and_verifies() {
        let rng = SystemRandom::new();
        let der = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
        let key = SigningKey::from_pem(&pem(der.as_ref())).unwrap();
        assert_eq!(key.algorithm(), "ES256");
        let jwt = key
            .assertion("toolgate", "https://as.example", Some("k1"), 1_000)
            .unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(
            decode(parts[0]),
            json!({"alg": "ES256", "typ": "JWT", "kid": "k1"})
        );
        let claims = decode(parts[1]);
        assert_eq!(
            (&claims["iss"], &claims["sub"], &claims["aud"]),
            (
                &json!("toolgate"),
                &json!("toolgate"),
                &json!("https://as.example")
            )
        );
        assert_eq!(
            (&claims["iat"], &claims["exp"]),
            (&json!(1_000), &json!(1_060))
        );
        assert_eq!(claims["jti"].as_str().unwrap().len(), 32);
        let pair = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            der.as_ref(),
            &rng,
        )
        .unwrap();
        let public = signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            pair.public_key().as_ref(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        assert!(public.verify(signed.as_bytes(), &signature).is_ok());
        // Each assertion is new: a server refusing replays sees a fresh `jti`.
        let again = key
            .assertion("toolgate", "https://as.example", None, 1_000)
            .unwrap();
        let other = decode(again.split('.').nth(1).unwrap());
        assert_ne!(other["jti"], claims["jti"]);
        assert_eq!(decode(again.split('.').next().unwrap()).get("kid"), None);
    }

    #[test]
    fn an_ed25519_key_signs_as_eddsa() {
        let der = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let key = SigningKey::from_pem(&pem(der.as_ref())).unwrap();
        assert_eq!(key.algorithm(), "EdDSA");
        let jwt = key.assertion("c", "a", None, 0).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(der.as_ref()).unwrap();
        let (signed, signature) = jwt.rsplit_once('.').unwrap();
        let public =
            signature::UnparsedPublicKey::new(&signature::ED25519, pair.public_key().as_ref());
        assert!(
            public
                .verify(
                    signed.as_bytes(),
                    &URL_SAFE_NO_PAD.decode(signature).unwrap()
                )
                .is_ok()
        );
    }

    #[test]
    fn what_cannot_sign_says_why() {
        assert_eq!(
            SigningKey::from_pem("not a key").err(),
            Some(KeyError::NotPem)
        );
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nMAA=\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(SigningKey::from_pem(sec1).err(), Some(KeyError::Sec1));
        assert_eq!(
            SigningKey::from_pem(&pem(b"\x30\x00")).err(),
            Some(KeyError::Unsupported)
        );
    }
}
