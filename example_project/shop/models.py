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
        null=True, blank=True, help_text="Set by the shop.mark_order_paid job (atomic)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Order #{self.pk}: {self.quantity} x {self.item} for {self.customer_email}"
