from shop.cart import Cart
from shop.pricing import calc_total_label
from shop.report import daily_report


def main():
    a, b = Cart(), Cart()
    for p in (10.0, 2.5):
        a.add(p)
    b.add(99.99)
    print(daily_report([a, b]))
    print(calc_total_label([1.0, 2.0]))
    print(f"discounted: {b.total(discount=0.1):.2f}")


if __name__ == "__main__":
    main()
