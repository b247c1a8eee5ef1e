from django.db import models


class Order(models.Model):
    customer_email = models.EmailField()
    item = models.CharField(max_length=200)
    quantity = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    confirmation_sent_at = models.DateTimeField(
        null=True, blank=True, help_text="Set by the shop.send_order_confirmation job."
    )
    paid_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=(
            "Set by the shop.charge_order job once the payment provider confirmed the payment "
            "(or by shop.mark_order_paid)."
        ),
    )
    shipped_at = models.DateTimeField(
        null=True, blank=True, help_text="Set by the shop.ship_order job (the chain's 2nd step)."
    )
    receipt_sent_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set by the shop.email_receipt job (the chain's last step).",
    )
    cancelled_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set by shop.charge_order when no payment was confirmed in time.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Order #{self.pk}: {self.quantity} x {self.item} for {self.customer_email}"


class PackedItem(models.Model):
    """One unit of an order, packed by its own shop.pack_item job (the jobs of an order run
    in parallel; its charge waits for all of them)."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="packed_items")
    unit = models.PositiveIntegerField(help_text="1 to the order's quantity.")
    packed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["order", "unit"]
        constraints = [
            models.UniqueConstraint(fields=["order", "unit"], name="shop_packeditem_unique")
        ]

    def __str__(self) -> str:
        return f"Order #{self.order_id}, unit {self.unit}"
