from django.contrib import admin

from shop.models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "customer_email",
        "item",
        "quantity",
        "created_at",
        "confirmation_sent_at",
    ]
    list_filter = [("confirmation_sent_at", admin.EmptyFieldListFilter)]
    search_fields = ["customer_email", "item"]
    readonly_fields = ["created_at", "confirmation_sent_at"]
