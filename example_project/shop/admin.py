from django.contrib import admin

from shop.models import Order, PackedItem


class PackedItemInline(admin.TabularInline):
    model = PackedItem
    extra = 0
    readonly_fields = ["unit", "packed_at"]
    can_delete = False


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "customer_email",
        "item",
        "quantity",
        "created_at",
        "confirmation_sent_at",
        "paid_at",
        "shipped_at",
        "receipt_sent_at",
        "cancelled_at",
    ]
    list_filter = [
        ("confirmation_sent_at", admin.EmptyFieldListFilter),
        ("receipt_sent_at", admin.EmptyFieldListFilter),
    ]
    search_fields = ["customer_email", "item"]
    readonly_fields = [
        "created_at",
        "confirmation_sent_at",
        "paid_at",
        "shipped_at",
        "receipt_sent_at",
    ]
    inlines = [PackedItemInline]
