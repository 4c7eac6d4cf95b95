"""The nonce store (DCTRL-0004 §5.2): persistent, so replay protection survives restarts (§12.2), and
one for the whole deployment, so a command accepted by one tenant is refused by the others."""

from django.db import models


class Nonce(models.Model):
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, db_index=False)
    sender_did = models.CharField(max_length=2048)
    nonce = models.CharField(max_length=36)
    expires_at = models.BigIntegerField(help_text="Unix ms: header.timestamp + window")

    class Meta:
        # One store for the deployment: a pair used on one tenant is used on all (docs/protocol-notes.md).
        constraints = [models.UniqueConstraint(fields=["sender_did", "nonce"], name="nonce_unique")]
        indexes = [models.Index(fields=["expires_at"], name="nonce_expiry")]

    def __str__(self) -> str:
        return f"nonce {self.nonce} (expires {self.expires_at})"
