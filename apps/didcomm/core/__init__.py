"""Pure DIDComm library: did:key, did:peer, DIDComm v2 JWE/JWS and plaintext messages. No Django imports."""
